"""Real English words and names that the synthetic world's syllables could spell; invented names avoid them.

Generated once from the WordPiece vocabulary of all-MiniLM-L6-v2 (BERT uncased, Apache-2.0): every whole,
alphabetic vocabulary entry of five or more letters that the name grammar of ``searchrl.data.synth`` can produce
(``onset? vowel coda (onset vowel coda){1,2} suffix?``). The vocabulary holds the common words and names of
English Wikipedia ("london", "thames", "homer"), so a name outside this list is, in practice, not a famous one.
Regenerate it if the syllables or suffixes in ``synth.py`` change.
"""

REAL_WORDS = frozenset(
    """
abandon aberdeen above abraham abuse abuses adele adobe agatha agenda agile agony agrarian aground agustin akbar
akira akron alabama alaska albania albanian albany alberta alberto album alderman alexa alexia alexis alfonso algae
algebra algebraic algeria algerian alien alike alison alive allan allegro allen allison almeida almond alone alonso
alpine altar alter alton alumni alumnus alvaro alvin alyssa alzheimer amanda amara amazon ambassador amber ambrose
amelia amend amiga amino amman ammonia amnesia amnesty amore amour amsterdam amtrak anaheim analysis anand
anastasia anatolia andersen anderson andes andover andre andrea andrei andres angel angela angeles angelina angelo
anger angola angrily angry angular angus animal anime anita ankara annapolis annex annum another anson antenna
antennae antennas anthem anthony antigen antigua antilles anton antonia antonio antony antrim apollo apostolic
arabia aragon aramaic arbor arden arena arenas argentina argus argyle arise arises arizona arkansas armada armand
armando armenia armenian armor armory armour aroma arose around arousal arrange arranger arrival arrive arrives
arsenal arsenic arson artemis artery arthur arturo asahi asbestos asher ashes ashok ashore aside aspen assam
assassin assume assumes assure assyrian aston astor astoria astro astros asylum atari athena athenian athlete
athletes atomic avalon avatar avenge avery avila azores azure babylon babylonian baden bahadur bahamas bahia baker
bakery balfour balkan balthazar bamboo banana bananas banda bandage bandages bangor banker banner barak barbados
barbara barbarian barber barely barge barges barker barnes baron barony barrage barre barrel barren barrio
barrister barron barry bartender barton basal basel baseman bases basha basil basin basis batavia bates baton
bavaria bavarian baxter before began begin begun behave behind beige belarus belarusian belgarath belgrade belinda
belize bella bellamy belle belly bender bengal bengali benin benito benny benson benton berber bergen berger berlin
berman bermuda bernardino bernardo bernstein berry bertha bertram bertrand beside besides bethany bethel bethlehem
beverly bihar biker bikes bikini bilbao billy binary bingo bipolar bison bites bizarre bodily bogota bohemia
bohemian bolivar bolivia bolivian bolton bomber bones bonfire bonus bonuses border boredom boris borne borneo
bosnia bosses boston botanic botany bother boulder boundary bounty bourbon bourne bournemouth braden brady brake
brakes brandon brandy brasil bratislava brave bravery braves bravo brazil brazilian bremen brenda brendan brennan
brethren breton bribe bribery bribes bride brigade brigades brisbane bristol britannia brody broke broken broker
bronze brothel brother brunei bruno brushes brutal brutally brute bryson bulgaria bulgarian bulge bulky bulletin
bully bumper bundle bundles bunker bunny burden buren burger burgundy burke burkina burma burmese burnham burton
burundi buses bushes buster byrne byron bytes daemon dakota dalai dallas dalton damage damages damien damon danes
danger dangerous danny dante danube darby dario darker darren darryl daryl dates davis debate debates debra debris
defend defender defense defenses define defines deity delgado delhi deliver della delle delta demand dementia
demise demon demonic demos denim denis denise dennis denny denote denotes dense densely density dental dentistry
denton denver depend deportivo deputy derby derek derive derives derry deserve deserves desire desires desmond
despite destiny deter devil devin devlin devon devote dexter digital dilemma dillon dimitri dimly dinamo diner
dinner dirty disaster disastrous dishes dislike dismissal disorder dispersal disperse disposal dispose dispute
disputes dissolve distal diver diverse divide divides divine doherty dollar dolly dolores domes domingo dominic
domino donate donegal donna donnelly donor donovan doris dorothea dorothy dorsal doses dover dozen dragon drake
drama dramas draper dresden dresser dresses drive driven driver drives drone drones drove drummer drummond drunken
drury dryly dubai dubois dukes duluth dummy dunbar dunedin dunes dunne duran durban durga durham dustin dusty duval
dylan dynamic dynamo dynasty ebony edison edith editor eileen einstein either elder elderly elena eleven elgin
elisa elise elite elites eliza ellen ellis ellison elmer elton elves elvis embassy embryo emerge emerges emerson
emery emile emilia emilio emily emory empathy emperor empire empires enamel endelle endemic endure enemy energy
engage engages engine engines engraver enormous ensure ensures enter entire entity entropy entry enzyme enzymes
epidemic erase erasmus erika eritrea ernesto error erskine espana essen essendon essex estadio estate estates
esther estonia estonian estrada eternal ethan ethanol ethel ether etudes evade evelyn evenly evergreen everton
every evolve expand expanse expense expenses expose extend external extra extras extreme extremes faber fabio
fabulous fades fallen fallon false falsely family famine famous famously fanny fantasia fantasy fares fargo farmer
farther faster fatal fatally fates father fatima favor favour federal federer felipe felix felony female females
femme fender fenton feral ferdinand fergus ferguson fernando ferrara ferrari ferreira ferrer ferris ferry fertile
festival fetal fever fiber fibre figure figures files filipino filly filter filthy final finale finally finely
finer fines finger finishes finite finland fires fisher fisherman fishermen fishery fishes fixture fixtures folder
folly fontana forbade forbes foreman foremost forestry forever forge forgive forgiven formal formally former
formerly formula formulas forster forsyth forte fortune fortunes forty forum fossil foster founder foundry fourteen
fulham fuller fully fulton funeral fungal fungi fungus funky funnel funny furry further futile future futures gabon
galen galileo gallantry gallery gallo gallon galveston gambia gamer games gamma gandhi ganga garage garbage garde
garden gardener gardiner gareth garland garner garrison garry gases gaston gates gather gavin gazes gemini gemma
gender genera general generic generous genes genesis geneva genoa genome genre genres gentry genus gerais german
germanic germany gerry gertrude gestapo gesture gestures gibraltar giles gilles gilmore ginger gingerly given gives
golden golfer gonna gonzaga gonzales goran gordon gorge gorilla gorman gospel gotham govern governor grade grades
grady graeme graham grammar grammy granada grande grandfather grandma grandmaster grandmother grandpa grandson
grange granite granny granville grape grapes grasses grassy grateful grave gravel gravely graves gravity gregor
gregorian gregory grenada grenade grenades greta grille grimes grimly groningen grove grover groves grupo gundam
gunfire gunmen gunnar gunner gunnery gunter gunther gustav gustave gustavo hades hagen halifax halle halves hamas
hamburger hamilton hammer hammond handel handful handgun handle handler handles handsome handy hangar hangul hanna
hannibal hannover hanoi hanover hansen hanson harbor harbour harden harder hardin hardy harlan harlem harmon
harmonic harmony harper harris harrison harry harta hasan hassan haste hastily hasty hates havana haven havilland
havre hazardous hazel heidi helen helena helene helix hellenic heller hello helsinki henan henderson hendrix henri
henrik henry henson herbal heresy herman hermes heroic heron herrera hesse hidalgo hides hilary hilda hillary hilly
hilton hindi hindu hindus hines hinges hiram hires hiroshi hiroshima hispanic historia historian historic history
hogan holden holder holes holland hollis holly holmes holstein holster homage homeland homer homes homme honda
honduras honesty honor honour hopeful hopes horatio horde horizon hormone hormones horne horror horse horsemen
horses horton hospital hostage hostages hostel hostile hotel hourly house houses houston hugely human humane humor
humorous humour hunan hungarian hungary hunger hungry hunter huron hurry husband husky hussein hydra hydro hydrogen
hyper hypothesis hysteria iberian ibrahim idaho illegal illinois image images immense immortal immune impetus
impose impulse index india indigo indira indonesia indonesian indus industry infamous infantry inferno informal
ingram inhuman inland inline inmate inmates innate inner inorganic insane inside insider insides insulin intake
integer integral intel intend intense inter interim intern internal interval intra intro intruder invade inventor
inverse investor invite invites involve involves iranian ireland irene irina ironic irony irvine isabel islam
islamic island islander isles israel israeli israelis istanbul italia italian italy itunes ivanov ivory kabul
kaladin kamal kamen kangaroo kannada kansas karate karel karen karim karin karma karnataka kassel kathleen
kathmandu kathryn kathy katrina kazan kellan keller kelly kelvin kendra kennedy kenneth kenny kenton kenya kerala
kerman kernel kerry kevin kilda kildare kilkenny killer kimberly kinase kinda kindly kiran kirby kisses kolkata
konstantin korea kosovo kramer kristen kristin kristina kruger kumar kurdistan label labor labour labrador laden
lagos laguna lahore lakes lamar landon lanes lange lanka lankan lantern large largely larger larkin larry larsen
larson larvae laser lashes lately later lateral latham latin latino laval lavender lazarus lebanese lebanon legal
legally legend leger leiden leinster leisure leland lemon lenin lennon lennox lenny lenses lesser lesson lester
lethal level lever levin levine libel liberal liberia libertarian liberty librarian library libre libya lifespan
ligand likely likes lilith lille lilly linda linden lineman linen liner lines linger linux lisbon lissa listen
listener lister liter literal litre litres liturgy lively liver livery lives lobes logan logos lombardy london
lonely longer loren lorenzo loser loses losses lotus louder lounge louvre lovely lover loves lukas lullaby lumber
luminous lumpur lunar luther lutheran luton luzon lydia lyman lyndon lynne mabel madam madame madeira madison
madonna madras maestro mafia mahal maker makes malabar malaga malaria maldives males malibu malik mallory malmo
malone malta maltese malvern mammal mammalian mammoth manage manager manages mandal mandarin mandate mandates
mandela mandir mandolin mandy manga mango mangrove mania manila mankind manly manner manny manor manson mantra
marathi marathon marek marge margin marginal maria marilyn marin marina marine marines marino mario maris marissa
marital marker marko markus marlene marlon marne marry marseille marta martha martin martina martini marty martyr
marvel marvelous marvin maryland mason masonic masonry masovian massage masses massimo massive master mastery mateo
mater maternal mates matilda matrix mature medal media medina megan melbourne melinda melissa mellon melody
melville melvin member membrane membranes memory mendes mendoza menon mental mentally mentor meredith merely merge
merger merlin merry merton message messages messenger messina messy metabolic metal meter methane methyl metis
metre metres metro metropolis migrate milan milano miles militia milky millennia miller milne milos milton minas
mindanao miner mineral minerva mines minimal minimum minister ministry minor minus minute minutes mirage miranda
mirror mirza misery misses missile missiles missouri missy mistake mistaken mistakes mister misty mixtape mixture
mobile model modern modes modify modular module modules mohan moldova molina molly molten momentum momma mommy
monde mongol mongolia mongolian moniker monitor monmouth monster montagu montana montane monte montrose monty moral
morale morales morally moran moravian moreno morgan mormon morris morrison morse mortal mortally mortar mortimer
morton mosaic moses moshe motel mother motive motives motor motorola mouse mouthful moves muller multi mumbai mummy
mundane mundo munro munster mural murder murderer murderous murmur museo musik muslim mussolini mustafa muster
mutiny myles mysore mystery nadia nagar nagasaki nakamura namely names namibia nanny nantes napoli narrator nasal
nasser nasty natal natalia natasha nathan native natives natural nature naval navarre navarro nazareth nazis
nebraska nebula nedra negro neither nelly nelson nemesis nepal nepali nerve nerves nervous nervously nestor nevada
never neville nigel niger nigeria nigerian nikita nikki nikola nikolai nineteen ninety nintendo nirvana nissan
nitrate nitrogen nobel nobody nodes nokia nolan nominal nonsense norma normal normally norman normandy norris norse
norte northern norton noses nostalgia notes nothin notre nouvelle novak novel novella novelty november number
numerous nurse nursery nurses nylon obama odessa odisha oklahoma older olive oliveira oliver olivia olsen olson
olympia olympus omaha omega ominous omnibus online onstage ontario opener openly opera operas orange orbital order
orderly oregon organ organic origin orlando ornate orson ortega orthodox orton osaka osborn osborne oskar osman
otago other ourselves outer outrage overland overly overrun overseen ozone padre padres padua pagan pages pagoda
pakistan pakistani palais paler palermo palestinian palma palmer pamela panama panda pandora panel panorama panther
pantry panzer papal paper papua papyrus parade parades paradox parallel paralysis parana paranoia pardon parental
paris parishes parisian parker parkinson parlor parma parody parole parry partisan party pasadena pasha passage
passages passenger passes passive pasta paste pastor pastoral pastry pasture pastures patel paternal paterson
pathogen patio patrol patron pavel paxton pedal pedersen pedestal pedro pegasus pembroke penal penalty pendleton
pendulum peninsula penis penny pentagon penthouse pereira performer perfume perrin perry persia person persona
personal personnel peruvian peter petersen peterson petite petra petrol piles pilgrim pillar pines pinto piper
pipes pirate pirates pistol piston pivotal pokemon poker poland polar poles polgara polite polka pollen polly
polymer pomerania pomeranian ponder popular populous portage portal porte porter porto portugal portuguese poses
posse possesses postage postal poster posthumous posture potato poultry pounder poverty pulse pulses punta pupil
purely purge purity purpose purposes purse pushes pussy putin python radar radio rafael rally ramon ramos rampage
random randomly randy range ranger ranges rankin ransom rarely rates rather ratio raven ravine razor rebel reborn
rebound refer reformer refuge refusal refuse refuses regal regan regime regimes regina regis register registrar
registry regular reilly relate relates relax remade remake remedy remember remind reminder remix remorse remote
removal remove removes renal render rental reporter reserve reserves reside resides resin resolve respond response
responses restore resume retire retro return revenge reverend reversal reverse revival revive revolver revolves
rider rides rigorous rihanna ringo risen rises risky rites rival rivalry river rivera roberta roberto robes robin
robinson robyn rodeo rodrigo roger rohan roland roles roller roman romani romania romanian romano romeo romero
ronan ronin ropes rosario rosary rosen rosenthal roses rossi roster rotary rotate rotherham rotor rouge rourke
rouse route routes routine routines rover ruben rubin rufus ruler rules rumor runes runner rural rushes russia
russo rusty ryder saber sabine sabre sabres sabrina saetan safari safely safer safety sahara saharan sakura salary
salazar salem sales salesman salim saline saliva salle sally salman salmon salon salsa salty salute salvador
salvage samantha samba sammy samoa samson samurai sandra sandstone sandy sanity santa santana santo santos sardinia
sasha satan satin satire satisfy saturn savage savanna saves sebastien sedan segunda seine seize seizure seizures
selangor seldom selena seller selma semester seminal seminar senate senator senegal sense senses sensor sensory
sentai sentinel serbia serena serene serge sergei sergio sermon serra serum serve server serves sesame seton seven
seventeen seventy several severe severn sevilla seville siberia siberian sides sigismund silas silesia silesian
silky silly silva silver silvery silvia silvio similar simon simone sinai sinatra singer singular sinister siren
sister sites sixteen sixty sizes skate skater skeletal skeleton skinner skinny skyla skylar skyline sober sofia
solar solely solomon solos solve somali somalia somber somethin somme sonar sonata sonia sonny sonora sonya
sorbonne sorry sousa southbound southend southern southland souza stade stage stages stake stakes stale stalin
stalker stampede stanton stanza stare stares starter state staten states statesman stature status statute statutes
stefan stefano steiner stella stellar stereo sterile steve steven stevenson stimuli stimulus stoke stokes stole
stolen stone stones stony storage store stores stormy story stove studio study sturdy style styles suburban sudan
sudanese sugar sulfate sulfur sullivan sultan sumatra summary summer summon sumner sunderland sunken sunni sunny
sunrise super superhero superman superstar surely surfer surge surgery surname surrender surround survival survive
survives survivor susan susanna suspend suspense sussex sutherland sutra suzanne suzuki sykes sylvester sylvia
symbol symbolic symmetry sympathy syndrome synonym syntax synthesis syria system systemic tabitha taboo taken takes
tales taliban taller tally talon taluk taluka tamara tamil tammy tampa tanaka tandem tango tanker tanner tanya
tanzania tapes tapestry tarzan tasha tasmania tasmanian taste tastes tatar tatum tavern telangana telegram teller
telugu temper tempo temporal tender tenderly tennis tenor tense tensor tenure teresa terminal terminus terra terre
terri terror terry tesla tessa testify textile textiles texture textures thames theme themes themselves therapy
there thereby theresa therese thermal these thesis theta thinner thirsty thirteen thirty thomas thomson thorne
thornton thorpe those thousand thunder tibetan tidal tides tiger tiles timber timely timer times timmy timor
timothy tirana tires titan titanic titular titus tobago tobin together token tokyo toledo tolkien tomas tomato
tommy tones tonga tonnes torino tornado toronto torpedo torre torres torso torture total totally toulon toulouse
trade trader trades tragedy transylvania travel traveler traveller traverse travis tremendous tremor trenton trevor
tribal tribe tribes tribunal tribune tribute trilogy trinity tripoli tristan trombone trondheim troupe truly truman
trumpeter tubes tubular tudor tulane tully tulsa tumor tunes tunis tunisia tunisian tunnel turbine turbines turbo
turin turner turnover turnpike tutor tyler types tyres tyrol tyrone tyson uganda ulster ultra ultrasound ulysses
umbrella umpire unbroken under undergo underground understand undertaken undone uneven unison unitarian unite unity
unlike unsafe unseen unsure until urban urbana urges urine ursula usage useful usher utopia valentin valle valor
valve valves vampire vampires vanessa vanilla vanity vantage vapor vargas varsity vassal vegas vegetarian vendor
venom ventral ventura venture ventures venus verbal verde verdi verge verify verity vernon verona versa verse
verses versus vertebrae vertex vertigo verve vessel veteran vidal video vigor vigorous vikram viktor villa village
villages villas ville vimes vinegar vines vintage vinyl viper viral virgil virgin virginia virus viruses visas
visitor vista vital vitamin vitro vogel volga volta voltage volume volumes volvo vortex voter votes vulgar vulture
yvonne zambia zebra zenith zimmerman zones
""".split()
)
